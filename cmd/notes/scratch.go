package main

import (
	"context"
	"fmt"
	"net/url"

	"github.com/jackc/pgx/v5"
)

// The example runs in a scratch database of its own unless --database-url
// names one. It uses only pgx for that, as a service of yours would: the
// example imports nothing of the module but its public packages.

// createScratchDatabase creates database name on the server at serverURL
// and returns its URL.
func createScratchDatabase(ctx context.Context, serverURL, name string) (string, error) {
	u, err := url.Parse(serverURL)
	if err != nil {
		return "", fmt.Errorf("parse database URL: %w", err)
	}
	if err := onServer(ctx, serverURL, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	u.Path = "/" + name
	return u.String(), nil
}

// dropScratchDatabase drops database name, disconnecting its sessions.
func dropScratchDatabase(ctx context.Context, serverURL, name string) error {
	if err := onServer(ctx, serverURL, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

// onServer runs one statement on its own connection to the server: CREATE
// and DROP DATABASE cannot run inside a transaction or a pool's session
// that uses the database.
func onServer(ctx context.Context, serverURL, sql string) error {
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return fmt.Errorf("connect to the database server: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql)
	return err
}
