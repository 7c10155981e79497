PY ?= .venv/bin/python
PROTOS := $(wildcard proto/sluice_pb/*.proto)

.PHONY: proto lint test demo

proto:
	$(PY) -m grpc_tools.protoc -I proto --python_out=. --pyi_out=. --grpc_python_out=. $(PROTOS)
	rm -f sluice_pb/common_pb2_grpc.py sluice_pb/metrics_pb2_grpc.py

lint:
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy .
	$(dir $(PY))lint-imports --no-cache --no-logo

test:
	bash scripts/test.sh

demo:
	bash scripts/demo.sh
