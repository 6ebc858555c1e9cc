#!/usr/bin/env bash
# profile.sh runs the no-op adapter lane of the Kafka bench under the CPU profiler,
# then again under the allocation profiler (sampling every allocation distorts CPU
# figures, so they are separate runs), and prints: pprof's top 20 by CPU, the CPU
# split by owner (each sample charged to its deepest frame of a module, so the
# runtime and standard library work a frame causes counts as its own; samples with
# no module frame are the runtime's own: GC workers, the scheduler), and the top
# 20 allocation sites. make profile-kafka runs it; PROFILE_N sets records per
# repetition (default 100000), PROFILE_DIR where the profiles go.
set -euo pipefail
GO=${GO:-go}
n=${PROFILE_N:-100000}
dir=${PROFILE_DIR:-.cache/profile}
mkdir -p "$dir"
cpu=$dir/kafka-adapter.cpu
mem=$dir/kafka-adapter.mem

$GO run ./internal/bench/kafka -lanes noop -reps 3 -n "$n" -cpuprofile "$cpu"
$GO run ./internal/bench/kafka -lanes noop -reps 1 -n "$((n / 4))" -memprofile "$mem" >/dev/null

echo
echo "== CPU, top 20 ($cpu)"
$GO tool pprof -top -nodecount=20 "$cpu" 2>/dev/null | sed -n '/flat%/,$p'

echo
echo "== CPU by owner (deepest module frame of each sample)"
$GO tool pprof -top -nodecount=100000 -nodefraction=0 -edgefraction=0 -show='^(github\.com|go\.uber\.org|golang\.org/x)/' "$cpu" 2>/dev/null |
	awk '
	/Total samples = / { for (i = 1; i <= NF; i++) if ($i == "=") { total = $(i + 1) } }
	$2 ~ /%$/ && $1 ~ /s$/ {
		v = $1; sub(/ms$/, "", v); if ($1 ~ /ms$/) v = v / 1000; else sub(/s$/, "", v)
		f = $6
		if (f ~ /^github\.com\/idemkit\/idemkit\/internal\/ordering/) o = "adapter (internal/ordering)"
		else if (f ~ /^github\.com\/idemkit\/idemkit\/adapters\/kafka/) o = "adapter (adapters/kafka)"
		else if (f ~ /^github\.com\/idemkit\/idemkit\/consumer/) o = "engine (consumer)"
		else if (f ~ /idemkit\/(store|lua)/) o = "store (store/redis, lua)"
		else if (f ~ /go-redis/) o = "go-redis"
		else if (f ~ /franz-go\/pkg\/kfake/) o = "kfake broker"
		else if (f ~ /franz-go|klauspost|pierrec/) o = "franz-go client"
		else if (f ~ /idemkit\/internal\/bench/) o = "bench program"
		else o = "other modules"
		sum[o] += v; shown += v
	}
	END {
		t = total; if (t ~ /ms$/) { sub(/ms$/, "", t); t = t / 1000 } else sub(/s$/, "", t)
		sum["runtime alone (GC workers, scheduler)"] = t - shown
		for (o in sum) printf "%7.2fs %6.1f%%  %s\n", sum[o], 100 * sum[o] / t, o
	}' | sort -rn
echo
echo "== allocations, top 20 sites by objects ($mem)"
$GO tool pprof -top -nodecount=20 -sample_index=alloc_objects "$mem" 2>/dev/null | sed -n '/flat%/,$p'
