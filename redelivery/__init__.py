"""The redelivery tracker: a separately deployed process that redelivers messages whose worker went silent."""
