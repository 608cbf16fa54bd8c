"""`clusterkit launch`: the checked settings reach the job; a failed or hung job explains itself.

Layer: features. Start at: stage.py.
"""
