"""What every Sluice service is built from: gRPC servers and channels, conversions at the wire's
edge, the data plane's address book, the Kafka outbox, MQTT plumbing, the daemon lifecycle and
the errors that reach a user as one line.

Services (``resource_manager``, ``node_agent``, ``job_master``, ``aggregator``) and the CLI
(``sluice``) import this package; it imports none of them (``make lint`` checks it).
"""
