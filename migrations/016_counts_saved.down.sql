DROP TABLE outbox_counts_saved;
