package cli

// StopOnSignal is stopOnSignal, for the test that sends it real signals.
var StopOnSignal = stopOnSignal
