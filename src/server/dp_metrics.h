// Data parallelism's /metrics (server/dp_router.h): the replicas' Prometheus texts merged into one exposition, so
// that each metric family appears once (promtool rejects a second HELP or TYPE) with a replica label on its samples.
#pragma once

#include <string>
#include <vector>

namespace kvik::server {

// The replicas' texts (one per replica, "" for one that did not answer) as one exposition: each family's HELP and
// TYPE once, then its samples from every replica, each with a replica="i" label first, then the totals over the
// replicas that answered with replica="all": sums (counters, histogram buckets, _sum and _count, gauges such as
// running requests), means for fraction gauges (names with perc, ratio, fraction or usage), none for *_info gauges.
// Aggregating queries skip them with {replica!="all"}.
std::string merge_replica_metrics(const std::vector<std::string>& texts);

}  // namespace kvik::server
