// Package telemetry holds what idemkit's observability plugins (contrib/idemprom
// and contrib/idemotel) share, whatever their metric library: the one label
// vocabulary they make of consumer's events (LabelValues), label-keyed series that
// cost one map lookup per event, and the bounded, expiring table of Kafka commit
// lags.
package telemetry
