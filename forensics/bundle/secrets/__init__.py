"""What free text is searched for when it is redacted (forensics/bundle/redact.py applies it):
credential shapes from gitleaks' rule set (:mod:`.gitleaks`, data in ``data/``), secrets known by
their context (:mod:`.contexts`, names judged by :mod:`.names`), the spans both find joined
(:mod:`.spans`), over a timestamped log read with its line times blanked (:mod:`.view`)."""
