kmq dlq list emails --limit 20
kmq dlq redrive emails                      # back onto the queue, delivery count 1 again; each letter once
