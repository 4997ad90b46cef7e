kmq send emails '{"to": "ada@example.com"}'
kmq send emails 'not json'                  # the handler rejects it: a dead letter
