package nethttp

// HashKey exposes hashKey to the tests of package nethttp_test.
var HashKey = hashKey
