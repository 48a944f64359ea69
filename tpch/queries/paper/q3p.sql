-- Q3': TPC-H Q3's join graph (customer -> orders -> lineitem, revenue per order): the market
-- segment and date conditions are replaced by a range of the customer key (clustering index):
-- 0.5 % of customers at any scale factor ({sf} is replaced by the scale factor).
-- driving-table: customer
-- driving-predicate: c_custkey <= CAST(750 * {sf} AS BIGINT)
SELECT l_orderkey, SUM(l_extendedprice * (1 - l_discount)) AS revenue, o_orderdate, o_shippriority
FROM customer, orders, lineitem
WHERE c_custkey <= CAST(750 * {sf} AS BIGINT)
  AND c_custkey = o_custkey
  AND l_orderkey = o_orderkey
GROUP BY l_orderkey, o_orderdate, o_shippriority
ORDER BY revenue DESC, o_orderdate, l_orderkey
LIMIT 10
