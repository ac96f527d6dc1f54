package bench

// ReadStatus exposes readStatus to the tests.
var ReadStatus = readStatus
