// Package testkit holds the small helpers tests share across packages:
// waiting on a condition with a deadline, counting rows, capturing logs,
// the real brokers (RabbitMQ, NATS) and the texts every door refuses. It
// imports nothing of the project, so any package's tests may use it; the
// outbox fixtures built on the project's own packages are in
// testkit/fixture, the per-test database in testkit/pgtest.
package testkit
