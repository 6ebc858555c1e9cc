package kafkashare_test

func helperMain() bool { return false }
