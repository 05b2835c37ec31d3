"""One module per rule, named tdlNNN_<slug>.py; the registry finds them."""
