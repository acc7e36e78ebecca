"""``python -m forensics`` runs the CLI."""

from forensics.cli import main

if __name__ == "__main__":
    main()
