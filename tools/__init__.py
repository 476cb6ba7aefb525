"""Small programs the launchers' plans run that are not launchers themselves."""
