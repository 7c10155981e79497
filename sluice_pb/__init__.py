"""Generated protobuf and gRPC modules for the Sluice API (do not edit; run `make proto`)."""
