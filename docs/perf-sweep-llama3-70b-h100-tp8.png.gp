set terminal pngcairo size 1400,1000 font ',11'
set output 'docs/perf-sweep-llama3-70b-h100-tp8.png'
set multiplot layout 2,2 title 'Predicted TPOT floor: llama3-70b on 8 x NVIDIA H100 SXM5 80GB, KV bf16'
set logscale xy
set xlabel 'batch (sequences)'
set ylabel 'TPOT (ms)'
set key top left
set grid
set xtics (1, 8, 32, 64, 128)
set xrange [0.8:170]
set title 'context 1K'
plot 'docs/perf-sweep-llama3-70b-h100-tp8.png.dat' using 1:2 with linespoints lw 2 title 'mha', 'docs/perf-sweep-llama3-70b-h100-tp8.png.dat' using 1:6 with linespoints lw 2 title 'gqa8', 'docs/perf-sweep-llama3-70b-h100-tp8.png.dat' using 1:10 with linespoints lw 2 title 'mqa', 'docs/perf-sweep-llama3-70b-h100-tp8.png.dat' using 1:14 with linespoints lw 2 title 'mla', 'docs/perf-sweep-llama3-70b-h100-tp8.png.dat' using 1:18 with linespoints lw 2 title 'mla-dp'
set title 'context 2K'
plot 'docs/perf-sweep-llama3-70b-h100-tp8.png.dat' using 1:3 with linespoints lw 2 title 'mha', 'docs/perf-sweep-llama3-70b-h100-tp8.png.dat' using 1:7 with linespoints lw 2 title 'gqa8', 'docs/perf-sweep-llama3-70b-h100-tp8.png.dat' using 1:11 with linespoints lw 2 title 'mqa', 'docs/perf-sweep-llama3-70b-h100-tp8.png.dat' using 1:15 with linespoints lw 2 title 'mla', 'docs/perf-sweep-llama3-70b-h100-tp8.png.dat' using 1:19 with linespoints lw 2 title 'mla-dp'
set title 'context 8K'
plot 'docs/perf-sweep-llama3-70b-h100-tp8.png.dat' using 1:4 with linespoints lw 2 title 'mha', 'docs/perf-sweep-llama3-70b-h100-tp8.png.dat' using 1:8 with linespoints lw 2 title 'gqa8', 'docs/perf-sweep-llama3-70b-h100-tp8.png.dat' using 1:12 with linespoints lw 2 title 'mqa', 'docs/perf-sweep-llama3-70b-h100-tp8.png.dat' using 1:16 with linespoints lw 2 title 'mla', 'docs/perf-sweep-llama3-70b-h100-tp8.png.dat' using 1:20 with linespoints lw 2 title 'mla-dp'
set title 'context 32K'
plot 'docs/perf-sweep-llama3-70b-h100-tp8.png.dat' using 1:5 with linespoints lw 2 title 'mha', 'docs/perf-sweep-llama3-70b-h100-tp8.png.dat' using 1:9 with linespoints lw 2 title 'gqa8', 'docs/perf-sweep-llama3-70b-h100-tp8.png.dat' using 1:13 with linespoints lw 2 title 'mqa', 'docs/perf-sweep-llama3-70b-h100-tp8.png.dat' using 1:17 with linespoints lw 2 title 'mla', 'docs/perf-sweep-llama3-70b-h100-tp8.png.dat' using 1:21 with linespoints lw 2 title 'mla-dp'
unset multiplot
