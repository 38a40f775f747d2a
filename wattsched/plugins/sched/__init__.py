"""Scheduler plugins (SchedulerType): the order in which pending jobs are started."""
