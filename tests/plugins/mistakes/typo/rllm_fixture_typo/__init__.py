"""A plugin whose entry points name a module (``plugn``) and an attribute (``Hoks``) that do not exist."""
