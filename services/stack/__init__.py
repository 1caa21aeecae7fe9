"""The product's composition root: which parts make reviewloop, where they listen, and the ``reviewloop``
command that serves, launches and inspects them. The only package that may import every service."""
