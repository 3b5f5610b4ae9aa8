"""HTTP faces of casque: the SQS-compatible endpoint (``daemon.http.sqs``) and the shared server
runner (``daemon.http.server``) that ``casque serve`` uses."""
