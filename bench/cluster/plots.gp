# Plots of the routing benchmark (bench/cluster). Reads the CSV/.dat files cluster_sim wrote
# and writes PNGs to <dir>/plots:
#   latency_<scenario>.png     TTFT p50/p95, TPOT p50 and E2E p95 vs offered load, per strategy
#                              (each stage's percentile averaged over the seeds)
#   pred_<scenario>.png        predicted-latency on the first seed: predicted vs actual TTFT over
#                              time, windowed MAPE and p90 coverage, retraining instants
#   prediction_quality.png     MAPE and p90 coverage of TTFT/TPOT predictions per stage (pooled
#                              over seeds)
# Usage: gnuplot -e "dir='bench/results/routing'" bench/cluster/plots.gp
if (!exists("dir")) dir = "bench/results/routing"
load dir."/data/lists.gp"
system("mkdir -p ".dir."/plots")

set terminal pngcairo size 1400,900 font ",10" noenhanced
set grid
set key top left box opaque
set style data linespoints
set pointsize 0.8

# --- Latency vs load, one line per strategy -----------------------------------------------------
do for [s in scenarios] {
  f = dir."/data/ladder_".s.".dat"
  nb = value("nblocks_".s)
  xc = value("xcol_".s)
  xl = (xc == 3) ? "offered load (requests/s)" : "stage (alternating low / high load)"
  set output dir."/plots/latency_".s.".png"
  set multiplot layout 2,2 title "Scenario ".s.": latency vs load per strategy (virtual time, mean over seeds)"
  set xlabel xl
  set logscale y
  set ylabel "TTFT p50 (ms)"
  plot for [i=0:nb-1] f index i using xc:4 title columnheader(1)
  set ylabel "TTFT p95 (ms)"
  plot for [i=0:nb-1] f index i using xc:5 title columnheader(1)
  unset logscale y
  set ylabel "TPOT p50 (ms)"
  plot for [i=0:nb-1] f index i using xc:7 title columnheader(1)
  if (value("slo_".s)) {
    set ylabel "SLO attainment"
    set yrange [0:1.05]
    plot for [i=0:nb-1] f index i using xc:14 title columnheader(1)
    set autoscale y
  } else {
    set logscale y
    set ylabel "E2E p95 (ms)"
    plot for [i=0:nb-1] f index i using xc:10 title columnheader(1)
    unset logscale y
  }
  unset multiplot
}

# --- Predicted vs actual TTFT over time (predicted-latency, least) -------------------------------
do for [s in predicted] {
  pts = dir."/data/pred_points_".s.".dat"
  win = dir."/data/pred_window_".s.".dat"
  rt = dir."/data/retrain_".s.".dat"
  set output dir."/plots/pred_".s.".png"
  set multiplot layout 2,1 title "Scenario ".s.": predicted-latency, picked pod's predicted (p90 model) vs actual TTFT (first seed)"
  set ylabel "TTFT (ms)"
  set logscale y
  unset arrow
  rtimes = system("awk '!/^#/ && $2 > 0 {printf \"%s \", $1}' ".rt)
  # A line per published model while they are few; with retrains every virtual second they
  # would hide the data, so the label gives the count instead.
  if (words(rtimes) <= 40) {
    set xlabel "virtual time (s); dashed lines: model retrained and published"
    do for [t in rtimes] {
      set arrow from first t+0, graph 0 to first t+0, graph 1 nohead dt 2 lc rgb "#999999"
    }
  } else {
    set xlabel sprintf("virtual time (s); %d models published", words(rtimes))
  }
  plot pts using 1:3 with points pt 7 ps 0.25 lc rgb "#c8c8c8" title "actual (sampled requests)", \
       win using 1:2 with lines lw 2 lc rgb "#000000" title "actual, 1-s median", \
       win using 1:4 with lines lw 1 lc rgb "#555555" dt 3 title "actual, 1-s p90", \
       win using 1:3 with lines lw 2 lc rgb "#1f77b4" title "predicted, 1-s median"
  unset logscale y
  set ylabel "percent"
  set yrange [0:*]
  plot win using 1:5 with lines lw 1.5 lc rgb "#d62728" title "TTFT MAPE (1-s windows)", \
       win using 1:6 with lines lw 1.5 lc rgb "#2ca02c" title "TTFT p90 coverage (1-s windows)", \
       90 with lines dt 2 lc rgb "#2ca02c" title "90% target"
  set autoscale y
  unset arrow
  unset multiplot
}

# --- Prediction quality per stage ----------------------------------------------------------------
q = dir."/data/quality.dat"
if (nquality > 0) {
  set output dir."/plots/prediction_quality.png"
  set multiplot layout 2,2 title "predicted-latency: quality of the picked pod's predictions per stage"
  set xlabel "stage"
  set key top left box opaque
  set ylabel "TTFT MAPE (%)"
  plot for [i=0:nquality-1] q index i using 2:4 title columnheader(1)
  set ylabel "TTFT p90 coverage (%)"
  set yrange [0:100]
  plot for [i=0:nquality-1] q index i using 2:5 title columnheader(1), 90 with lines dt 2 lc rgb "#000000" title "target"
  set autoscale y
  set ylabel "TPOT MAPE (%)"
  plot for [i=0:nquality-1] q index i using 2:6 title columnheader(1)
  set ylabel "TPOT p90 coverage (%)"
  set yrange [0:100]
  plot for [i=0:nquality-1] q index i using 2:7 title columnheader(1), 90 with lines dt 2 lc rgb "#000000" title "target"
  set autoscale y
  unset multiplot
}
