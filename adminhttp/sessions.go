package adminhttp

import (
	"context"
	"crypto/sha256"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// sessionStore keeps the dashboard's sign-ins in outbox_admin_sessions, so
// that signing out, or replacing the admin token, ends a session on every
// outboxd process that shares the database. It stores no secret: a
// session's row is keyed by the SHA-256 of the cookie's session part, and
// the token it was made with is named by keyID, a keyed hash of it.
//
// Only servers with a token keep sessions here. Without one a session only
// anchors CSRF tokens (anyone on loopback is let in) and stays in the
// cookie alone.
type sessionStore struct {
	pool  *pgxpool.Pool
	keyID []byte
}

// sessionID is what the store knows a session by: the SHA-256 of the
// cookie value's signed part.
func sessionID(cookie string) []byte {
	body, _, _ := strings.Cut(cookie, ".")
	h := sha256.Sum256([]byte(body))
	return h[:]
}

// create records a new session and prunes expired ones, so the table holds
// no more than the sessions of one SessionTTL.
func (st sessionStore) create(ctx context.Context, cookie string, now, expires time.Time) error {
	if _, err := st.pool.Exec(ctx, `DELETE FROM outbox_admin_sessions WHERE expires_at <= $1`, now); err != nil {
		return err
	}
	_, err := st.pool.Exec(ctx, `INSERT INTO outbox_admin_sessions (id, key_id, created_at, expires_at) VALUES ($1, $2, $3, $4)`,
		sessionID(cookie), st.keyID, now, expires)
	return err
}

// valid reports whether the session is recorded, made with the current
// token, and not expired at now.
func (st sessionStore) valid(ctx context.Context, cookie string, now time.Time) (bool, error) {
	var ok bool
	err := st.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM outbox_admin_sessions WHERE id = $1 AND key_id = $2 AND expires_at > $3)`,
		sessionID(cookie), st.keyID, now).Scan(&ok)
	return ok, err
}

// revoke ends a session.
func (st sessionStore) revoke(ctx context.Context, cookie string) error {
	_, err := st.pool.Exec(ctx, `DELETE FROM outbox_admin_sessions WHERE id = $1`, sessionID(cookie))
	return err
}

// prune removes expired sessions and those made with another token: the
// token was replaced, so they end even on processes that still run with
// the old one. It returns how many sessions of another token it removed.
func (st sessionStore) prune(ctx context.Context, now time.Time) (int64, error) {
	if _, err := st.pool.Exec(ctx, `DELETE FROM outbox_admin_sessions WHERE expires_at <= $1`, now); err != nil {
		return 0, err
	}
	tag, err := st.pool.Exec(ctx, `DELETE FROM outbox_admin_sessions WHERE key_id <> $1`, st.keyID)
	return tag.RowsAffected(), err
}
