-- Q5': TPC-H Q5's join graph (orders -> customer, lineitem -> supplier -> nation -> region,
-- revenue per nation of ASIA): the year of order dates becomes 12 days (o_orderdate index):
-- about 0.5 % of orders at any scale factor.
-- driving-table: orders
-- driving-predicate: o_orderdate >= DATE '1994-01-01' AND o_orderdate < DATE '1994-01-13'
SELECT n_name, SUM(l_extendedprice * (1 - l_discount)) AS revenue
FROM customer, orders, lineitem, supplier, nation, region
WHERE c_custkey = o_custkey
  AND l_orderkey = o_orderkey
  AND l_suppkey = s_suppkey
  AND c_nationkey = s_nationkey
  AND s_nationkey = n_nationkey
  AND n_regionkey = r_regionkey
  AND r_name = 'ASIA'
  AND o_orderdate >= DATE '1994-01-01' AND o_orderdate < DATE '1994-01-13'
GROUP BY n_name
ORDER BY revenue DESC, n_name
