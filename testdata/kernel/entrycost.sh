#!/bin/sh
# Disassembly excerpts of the SCS entry code of the three 6.12 SCS kernels (one per x18 policy of
# call_on_irq_stack), for the check of package scs's cost table against real code
# (scs/realcost_test.go, issue 27):
#
#   sh testdata/kernel/entrycost.sh      # after build-scs.sh 6.12, 6.12-onstack, 6.12-percpu
#   sh testdata/kernel/entrycost.sh scs-6.12-percpu   # only some of them
#
# Writes testdata/kernel/entrycost/scs-6.12{,-onstack,-percpu}.txt: GNU objdump's disassembly of
# call_on_irq_stack, __sdei_asm_handler and cpu_switch_to from $KCAP/scs/NAME/vmlinux (the build
# with SCS_EXTRA=scs-6.12-issue27.config, which builds SDEI in), and a header naming the vmlinux
# (build ID and sha256). Needs binutils-aarch64-linux-gnu. CI never runs it; it checks the files.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
KCAP=${KCAP:-/work/kcap}
mkdir -p "$here/entrycost"
[ $# -gt 0 ] || set -- scs-6.12 scs-6.12-onstack scs-6.12-percpu
for n in "$@"; do
	v=$KCAP/scs/$n/vmlinux
	[ -f "$v" ] || { echo "no $v: run build-scs.sh ${n#scs-} first" >&2; exit 1; }
	o=$here/entrycost/$n.txt
	{
		echo "# $n: aarch64-linux-gnu-objdump -d --disassemble=SYM vmlinux ($(aarch64-linux-gnu-objdump --version | head -1))"
		echo "# vmlinux sha256 $(sha256sum "$v" | cut -c1-64), $(aarch64-linux-gnu-readelf -n "$v" | sed -n 's/^ *Build ID: */build ID /p')"
		echo "# $(cat "$KCAP/scs/$n/build-time")"
		for s in call_on_irq_stack __sdei_asm_handler cpu_switch_to; do
			echo
			aarch64-linux-gnu-objdump -d --disassemble="$s" "$v" | sed -n "/^[0-9a-f]* <$s>:\$/,/^\$/p" | sed '/^$/d'
		done
	} >"$o"
	grep -q '<__sdei_asm_handler>:' "$o" || { echo "$n: no __sdei_asm_handler (SDEI not built in?)" >&2; exit 1; }
	echo "$o: $(wc -l <"$o") lines"
done
