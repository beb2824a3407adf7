from orchestrator.cli import entry

entry()
