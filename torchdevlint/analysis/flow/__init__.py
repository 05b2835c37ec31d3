"""The device-flow model: what each value is and where it lives, statement by statement."""
