package nethttp_test

func helperMain() bool { return false }
