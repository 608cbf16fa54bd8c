"""Provisioning: the Ansible playbooks that fix what `check` finds.

playbook.py finds site.yml (package data, a checkout, $CLUSTERKIT_PLAYBOOKS) and runs
ansible-playbook bounded and stoppable; remedy.py gives the network and image stages'
findings the playbook tag that fixes them (a Fix, checks/model.py), whose exact
`clusterkit provision ... --tags TAG --limit HOSTS` command the remedy and `--fix-plan` show.

Layer: features. Start at: playbook.py.
"""
