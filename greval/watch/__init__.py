"""``greval watch``'s parts: the sampling filter's language (``where``), the sampling rules (``sampling``), the
sources read a page at a time (``sources``), what may be spent (``budget``), each window's figures and alarm
(``windows``), where alarms go (``alarms``), the review share (``review``), the health endpoint and back-off
(``service``) and the options (``options``). :mod:`greval.flows.watch` composes them into a pass."""
