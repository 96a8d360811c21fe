// Data parallelism's router (server/dp_router.h): the routing rule, and the merged metrics (server/dp_metrics.h). The
// processes, the proxy and the prefix summaries end to end are in tests/e2e/data_parallel.test.mjs.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "server/dp_metrics.h"
#include "server/dp_router.h"

namespace kvik::server {
namespace {

ReplicaLoad load(int64_t in_flight, int64_t matched = 0, int64_t routed = 0, bool up = true) {
  return {up, in_flight, routed, matched};
}

TEST(DpRouter, LongestCachedPrefixWins) {
  const RouteChoice c = choose_replica({load(0, 2), load(3, 5), load(0, 4)});
  EXPECT_EQ(c.replica, 1);
  EXPECT_TRUE(c.by_prefix);
}

TEST(DpRouter, NoPrefixGoesToTheLeastLoadedThenTheLeastRouted) {
  EXPECT_EQ(choose_replica({load(2), load(1), load(3)}).replica, 1);
  EXPECT_FALSE(choose_replica({load(2), load(1), load(3)}).by_prefix);
  EXPECT_EQ(choose_replica({load(0, 0, 5), load(0, 0, 4), load(1, 0, 0)}).replica, 1);
  EXPECT_EQ(choose_replica({load(0, 0, 4), load(0, 0, 4)}).replica, 0);
}

TEST(DpRouter, EqualPrefixesGoToTheLessLoadedHolder) {
  EXPECT_EQ(choose_replica({load(4, 3), load(2, 3), load(0, 0)}).replica, 1);
}

TEST(DpRouter, AnOverloadedHolderLosesItsPrefixPreference) {
  // Within the threshold the prefix wins; one request beyond it, the least loaded replica does.
  EXPECT_EQ(choose_replica({load(kBalanceThreshold + 1, 4), load(1)}).replica, 0);
  const RouteChoice c = choose_replica({load(kBalanceThreshold + 2, 4), load(1)});
  EXPECT_EQ(c.replica, 1);
  EXPECT_FALSE(c.by_prefix);
}

TEST(DpRouter, DownReplicasAreNeverChosen) {
  EXPECT_EQ(choose_replica({load(0, 9, 0, false), load(5)}).replica, 1);
  EXPECT_EQ(choose_replica({load(0, 0, 0, false), load(0, 0, 0, false)}).replica, -1);
  EXPECT_EQ(choose_replica({}).replica, -1);
}

TEST(DpRouter, MergedMetricsHaveEachFamilyOnceAndAReplicaLabelOnEverySample) {
  const std::string a =
      "# HELP kvik:x_total X.\n# TYPE kvik:x_total counter\nkvik:x_total{model_name=\"m\"} 3\n"
      "# HELP kvik:h Histogram.\n# TYPE kvik:h histogram\nkvik:h_bucket{model_name=\"m\",le=\"+Inf\"} 1\n"
      "kvik:h_sum{model_name=\"m\"} 0.5\nkvik:h_count{model_name=\"m\"} 1\n";
  const std::string b =
      "# HELP kvik:x_total X.\n# TYPE kvik:x_total counter\nkvik:x_total{model_name=\"m\"} 4\nplain 7\n";
  EXPECT_EQ(
      merge_replica_metrics({a, "", b}),
      "# HELP kvik:x_total X.\n# TYPE kvik:x_total counter\n"
      "kvik:x_total{replica=\"0\",model_name=\"m\"} 3\nkvik:x_total{replica=\"2\",model_name=\"m\"} 4\n"
      "kvik:x_total{replica=\"all\",model_name=\"m\"} 7\n"
      "# HELP kvik:h Histogram.\n# TYPE kvik:h histogram\n"
      "kvik:h_bucket{replica=\"0\",model_name=\"m\",le=\"+Inf\"} 1\nkvik:h_sum{replica=\"0\",model_name=\"m\"} 0.5\n"
      "kvik:h_count{replica=\"0\",model_name=\"m\"} 1\n"
      "kvik:h_bucket{replica=\"all\",model_name=\"m\",le=\"+Inf\"} 1\nkvik:h_sum{replica=\"all\",model_name=\"m\"} "
      "0.5\n"
      "kvik:h_count{replica=\"all\",model_name=\"m\"} 1\n"
      "plain{replica=\"2\"} 7\nplain{replica=\"all\"} 7\n");
}

// Totals: counters and histograms summed per label set (buckets per le), a fraction gauge averaged, running
// requests summed, an info gauge left alone.
TEST(DpRouter, MergedMetricsCarryTotalsOverTheReplicas) {
  const auto text = [](int running, double usage, int tokens, int bucket) {
    return fmt::format(
        "# HELP kvik:num_requests_running R.\n# TYPE kvik:num_requests_running gauge\n"
        "kvik:num_requests_running{{model_name=\"m\"}} {}\n"
        "# HELP kvik:kv_cache_usage_perc U.\n# TYPE kvik:kv_cache_usage_perc gauge\n"
        "kvik:kv_cache_usage_perc{{model_name=\"m\"}} {}\n"
        "# HELP kvik:lora_requests_info L.\n# TYPE kvik:lora_requests_info gauge\nkvik:lora_requests_info{{a=\"x\"}} "
        "1\n"
        "# HELP kvik:generation_tokens_total G.\n# TYPE kvik:generation_tokens_total counter\n"
        "kvik:generation_tokens_total{{model_name=\"m\"}} {}\n"
        "# HELP kvik:t T.\n# TYPE kvik:t histogram\nkvik:t_bucket{{le=\"0.1\"}} {}\nkvik:t_bucket{{le=\"+Inf\"}} 9\n",
        running, usage, tokens, bucket);
  };
  const std::string m = merge_replica_metrics({text(3, 0.5, 100, 2), text(5, 0.25, 40, 7)});
  for (const char* want :
       {"kvik:num_requests_running{replica=\"all\",model_name=\"m\"} 8\n",
        "kvik:kv_cache_usage_perc{replica=\"all\",model_name=\"m\"} 0.375\n",
        "kvik:generation_tokens_total{replica=\"all\",model_name=\"m\"} 140\n",
        "kvik:t_bucket{replica=\"all\",le=\"0.1\"} 9\n", "kvik:t_bucket{replica=\"all\",le=\"+Inf\"} 18\n"})
    EXPECT_NE(m.find(want), std::string::npos) << want << " in\n" << m;
  EXPECT_EQ(m.find("kvik:lora_requests_info{replica=\"all\""), std::string::npos) << m;
}

TEST(DpRouter, AnEmptyLabelSetGetsTheReplicaLabelAlone) {
  EXPECT_EQ(merge_replica_metrics({"x{} 1\n"}), "x{replica=\"0\"} 1\nx{replica=\"all\"} 1\n");
  EXPECT_EQ(merge_replica_metrics({"x\n"}), "x{replica=\"0\"}\n");  // a line without a value does not throw
}

}  // namespace
}  // namespace kvik::server
