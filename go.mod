module github.com/outboxkit/outbox

go 1.26.8
