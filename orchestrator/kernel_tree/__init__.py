"""Reading a kernel tree on the controller, before anything is created.

One package, read top to bottom for `bench launch --kernel DIR`:

- `user`: a user's repository as the plan's candidate (`read_candidate`) or its
  `--baseline REF` (`read_baseline`): the three steps below, in that order;
- `collect`: the tree's files as git sees it, no link, bounded before any is read
  (`collect_tree`), and its digest (`tree_sha256`);
- `contract`: its bench-kernel.toml from those files, its entry modules in the tree, the
  plan of its own it may name;
- `git`: git run without the programs a repository's configuration names (the listing,
  a revision's archive, the commit a tree sits on and whether it is dirty);
- `own`: our kernel (kernels/) declared and read the same way, with its baseline.

`orchestrator/payload.py` only packs what these read.
"""
