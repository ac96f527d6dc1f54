DROP TABLE outbox_admin_sessions;
