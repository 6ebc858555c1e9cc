package dynamodb

// childRole names the part a child process of the test binary plays.
const childRole = "IDEMKIT_DYNAMODB_CHILD"

func runChild(role string) int { return 2 }
