"""Internals of the distributed front end: the process's job context (transport and runtimes)
and global tensors."""
