"""The evidence bundle: format constants, atomic writer, hostile-input reader, verification, redaction."""
