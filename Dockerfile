FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY kmq ./kmq
COPY examples ./examples
RUN pip install --no-cache-dir .
ENV PYTHONUNBUFFERED=1
