package intentstore

import (
	"context"
	"errors"
	"io"
	"net"

	"github.com/jackc/pgx/v5/pgconn"
)

// IsTransient reports whether a failed statement or transaction may succeed
// if run again: serialization failures, deadlocks, a server shutting down or
// a backend terminated by an operator, and connections lost before or during
// commit. It says nothing of whether a lost commit happened: every write of
// this package is safe to repeat (a consumer's rerun finds its processed
// marker; a settle's rerun finds its claim released and changes nothing).
func IsTransient(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "40001", // serialization_failure
			"40P01", // deadlock_detected
			"57P01", // admin_shutdown (pg_terminate_backend)
			"57P02", // crash_shutdown
			"57P03": // cannot_connect_now
			return true
		}
		return pgErr.Code[:2] == "08" // connection exceptions
	}
	if pgconn.SafeToRetry(err) {
		return true
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connectErr) || errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
