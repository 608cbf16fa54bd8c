"""Provisioning: the Ansible playbooks that fix what `check` finds.

playbook.py finds site.yml (package data, a checkout, $CLUSTERKIT_PLAYBOOKS) and runs
ansible-playbook bounded and stoppable; remedy.py turns a finding into the exact
`clusterkit provision ... --tags TAG --limit HOSTS` command that fixes it.
"""
