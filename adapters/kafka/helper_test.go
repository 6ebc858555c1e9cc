package kafka_test

// helperMain runs this test binary as a group member process when asked to by a
// test (see member_process_test.go); it reports whether it did.
func helperMain() bool { return false }
