//go:build benchpeers

package bench

// The peers that bring their own dependencies (Watermill, DBOS) are built
// only with -tags benchpeers, which `make bench` sets, so that the outboxd
// a user installs links none of them.

// linkedPeers are the peers this binary was built with, after River's.
func linkedPeers() []e2ePeer { return []e2ePeer{watermillPeer(), dbosPeer()} }

// unlinkedPeers are the peers this binary was built without.
func unlinkedPeers() []string { return nil }
