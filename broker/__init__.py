"""The notifier: consumes dispatched jobs, holds each until its moment, calls it back."""
