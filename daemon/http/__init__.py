"""The HTTP faces of casque: the SQS-compatible endpoint (``sqs/``), the operators' console
(``console/``), and the server runner (``server.py``) that ``casque serve`` and ``casque web`` use."""
