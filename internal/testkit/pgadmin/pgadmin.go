// Package pgadmin creates and drops whole databases on a server, for the
// demo's scratch database and the tests' per-test databases.
package pgadmin

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// WithDatabase returns serverURL with its database name replaced by name.
func WithDatabase(serverURL, name string) (string, error) {
	u, err := url.Parse(serverURL)
	if err != nil {
		return "", fmt.Errorf("parse database URL: %w", err)
	}
	u.Path = "/" + name
	return u.String(), nil
}

// CreateDatabase creates database name on the server at serverURL, cloned
// from template when template is not empty.
func CreateDatabase(ctx context.Context, serverURL, name, template string) error {
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return fmt.Errorf("connect to the database server: %w", err)
	}
	defer conn.Close(ctx)
	sql := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if template != "" {
		sql += " TEMPLATE " + pgx.Identifier{template}.Sanitize()
	}
	// Cloning fails while another session briefly holds the template:
	// retry for a while.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err = conn.Exec(ctx, sql)
		if err == nil || !strings.Contains(err.Error(), "is being accessed by other users") || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

// DropDatabase drops database name if it exists, disconnecting its sessions.
func DropDatabase(ctx context.Context, serverURL, name string) error {
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return fmt.Errorf("connect to the database server: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}
