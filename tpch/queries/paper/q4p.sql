-- Q4': TPC-H Q4's join graph (orders with an EXISTS on lineitem, counted by priority): the
-- quarter of order dates becomes 12 days (o_orderdate index): about 0.5 % of orders, since
-- order dates spread evenly over 2,406 days at any scale factor.
-- driving-table: orders
-- driving-predicate: o_orderdate >= DATE '1995-01-01' AND o_orderdate < DATE '1995-01-13'
SELECT o_orderpriority, COUNT(*) AS order_count
FROM orders
WHERE o_orderdate >= DATE '1995-01-01' AND o_orderdate < DATE '1995-01-13'
  AND EXISTS (SELECT * FROM lineitem WHERE l_orderkey = o_orderkey AND l_commitdate < l_receiptdate)
GROUP BY o_orderpriority
ORDER BY o_orderpriority
