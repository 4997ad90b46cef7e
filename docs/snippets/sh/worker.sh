kmq worker emails_worker:handle --queue emails --concurrency 4
