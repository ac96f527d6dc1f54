-- Dashboard sign-ins of the admin server (internal/adminhttp). The browser
-- holds a signed cookie; a session is valid only while its row is here, so
-- signing out ends it on every outboxd process at once. id is the SHA-256
-- of the cookie's session part, never the cookie itself; key_id names the
-- admin token the session was made with (a keyed hash of it, not the
-- token), so sessions made with a replaced token are refused and removed.
-- Expired rows are pruned by the admin server.
CREATE TABLE outbox_admin_sessions (
    id         bytea       PRIMARY KEY,
    key_id     bytea       NOT NULL,
    created_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    CONSTRAINT outbox_admin_sessions_id_check CHECK (length(id) = 32),
    CONSTRAINT outbox_admin_sessions_key_id_check CHECK (length(key_id) BETWEEN 8 AND 64),
    CONSTRAINT outbox_admin_sessions_expiry_check CHECK (expires_at > created_at)
);
CREATE INDEX outbox_admin_sessions_expires_at_idx ON outbox_admin_sessions (expires_at);
