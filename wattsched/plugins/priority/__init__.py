"""Priority plugins (PriorityType): each pending job's priority."""
