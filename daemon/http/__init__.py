"""The HTTP faces of casque: the operators' console (``console/``) and the SQS endpoint."""
