"""In-process tests of the controller's transitions, state store and views."""
