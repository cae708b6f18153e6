from fedmoo.cli import entry

entry()
