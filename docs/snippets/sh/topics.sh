kmq topics create            # messages, markers (LogAppendTime), dead-letter and control topics
kmq topics check
