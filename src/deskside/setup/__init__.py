"""`deskside setup`: a node's day-0 configuration (the fabric link's address and MTU, SSH
from the head to every worker, an optional GPU clock cap), planned as files per node
(`wanted`, pure), compared with what each node holds and what deskside recorded there
(`changes`, pure), then written through the node's Transport and recorded (`apply`)."""
