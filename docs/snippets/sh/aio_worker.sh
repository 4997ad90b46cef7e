kmq worker aio_handlers:handle --queue emails --concurrency 100 --time-limit 30
