//go:build !benchpeers

package bench

// linkedPeers are the peers this binary was built with, after River's:
// none, without -tags benchpeers (see peers_linked.go).
func linkedPeers() []e2ePeer { return nil }

// unlinkedPeers are the peers this binary was built without.
func unlinkedPeers() []string { return []string{"watermill", "dbos"} }
