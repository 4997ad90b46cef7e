"""A fault harness beyond kills: freezes (SIGSTOP/SIGCONT) and network partitions in namespaces made here.

- ``netns``: network namespaces joined to this host's namespace by veth pairs (``ip netns``); a partition takes a
  pair's link down (both directions), a flapping link toggles it. Every namespace and link the harness makes is
  named with its run's prefix and removed when it ends, on failure too, and by ``sweep`` after a crash;
- ``process``: kmq workers, trackers and producers started as processes (in a namespace or not, restarted after a
  non-zero exit as a supervisor would), frozen and thawed, their CPU time and resident memory read from /proc, their
  health endpoints asked (from inside their namespace);
- brokers: ``LocalKafka(extra_listeners=…)`` listens on the host side of each namespace's link and advertises it
  there; ``LocalCluster(hosts=…, launch_prefix=…)`` runs a node inside a namespace.

The scenarios and their verdicts (lost, duplicates explained, recovery, CPU, health) are in tests/faults.

Root is needed for namespaces (``ip`` from iproute2); nothing leaves the namespaces this harness makes. It imports
nothing of kmq's client path: it drives kmq through its command line, like an operator.
"""
